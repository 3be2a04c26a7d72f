"""One device for a whole build (pipeline.devices): names, the memory each CUDA worker needs, how
many fit on a card (a fake card where there is none), the runner handing the device to the
notebooks that train and recording it, never hashing it."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import torch
import yaml

from dyckbook.experiment.run import RunConfig
from dyckbook.pipeline import cli, devices, executors, runner

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GiB = 2**30


@pytest.fixture
def fake_card(monkeypatch: pytest.MonkeyPatch):
    """A CUDA card of ``memory`` free bytes on this (maybe CPU-only) machine."""
    def install(memory: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setenv(devices.MEMORY_ENV, str(memory))
    return install


@pytest.mark.parametrize("good", ["cpu", "cuda", "cuda:1", "auto"])
def test_device_names(good: str) -> None:
    assert devices.check_device(good) == good


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "cuda:", "cuda:x", "", None, 0])
def test_a_bad_device_is_named(bad) -> None:
    with pytest.raises(ValueError, match=f"device must be one of .*got {bad!r}"):
        devices.check_device(bad)


def test_auto_is_cuda_where_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve("auto") == "cpu"
    with pytest.raises(ValueError, match="device is 'cuda', but this machine has no CUDA"):
        devices.resolve("cuda")
    assert devices.resolve("cuda", here=False) == "cuda"  # a cluster's workers resolve it
    assert devices.resolve("auto", here=False) == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve("auto") == "cuda"
    assert devices.resolve("cuda:1") == "cuda:1"


def test_the_names_agree_with_the_librarys() -> None:
    from dyckbook.experiment import checkpoint

    assert (devices.MEMORY_ENV, devices.CONTEXT_BYTES) == (checkpoint.MEMORY_ENV,
                                                           checkpoint.CONTEXT_BYTES)


def test_a_fake_card_and_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(devices.MEMORY_ENV, str(3 * GiB))
    assert devices.device_memory("cuda") == 3 * GiB
    monkeypatch.setenv(devices.MEMORY_ENV, "3G")
    with pytest.raises(ValueError, match=f"{devices.MEMORY_ENV} must be a number of bytes, "
                                         "got '3G'"):
        devices.device_memory("cuda")


def _grid_config(**changes) -> RunConfig:
    from dyckbook.chapters.ablation_grid import Cell, GridSpec

    return GridSpec(**changes).config(Cell(3, 2, "causal", "learned", "mean"))


def test_the_estimate_grows_with_what_a_worker_holds() -> None:
    small = _grid_config()
    base = devices.estimate_bytes(small, 1)
    assert base > devices.CONTEXT_BYTES
    # every model's weights, gradients, moments and activations: more seeds, more memory
    assert devices.estimate_bytes(small, 10) > base
    assert devices.estimate_bytes(small, 10) - base > 9 * (base - devices.CONTEXT_BYTES) * 0.5
    for bigger in (dict(batch_size=256), dict(max_length=96), dict(d_model=128, d_mlp=256)):
        assert devices.estimate_bytes(_grid_config(**bigger), 1) > base, bigger
    # exp. 7's shape at 4,096 symbols: attention over 4,098 keys, several GiB for batch 8
    from dyckbook.experiment.run import thesis_config

    long = thesis_config(7, literal=False).override(max_length=4096, test_max_length=4096,
                                                    n_ctx=4096, batch_size=8)
    assert devices.estimate_bytes(long, 1) > 4 * GiB


@pytest.mark.parametrize(("each", "free", "requested", "expected"), [
    ([1, 1, 1], 10, 8, 3),  # one worker per job at most
    ([4, 2, 2], 10, 8, 2),  # each as large as the largest: 10 // 4
    ([4, 2, 2], 10, 1, 1),  # never more than asked for
    ([20], 10, 8, 1),  # too large for the card: still one try, alone
    ([], 10, 8, 1),
])
def test_fitting(each, free, requested, expected) -> None:
    assert devices.fitting(each, free, requested) == expected


def test_workers_on_a_fake_card(fake_card) -> None:
    configs = [_grid_config(), _grid_config(d_model=64, d_mlp=128)]
    largest = max(devices.estimate_bytes(c, 10) for c in configs)
    assert devices.workers("cpu", configs, 10, 6) == 6  # the CPU: as asked
    fake_card(3 * largest + largest // 2)
    assert devices.workers("cuda", configs, 10, 6) == 2  # two configurations, fit three
    assert devices.workers("cuda", configs * 3, 10, 6) == 3
    assert devices.workers("auto", configs * 3, 10, 2) == 2
    fake_card(largest // 2)
    assert devices.workers("cuda", configs, 10, 6) == 1


def test_the_runners_kernels_share_a_fake_card(fake_card) -> None:
    params = [{"n_seeds": 10, "d_model": 32, "max_length": 16}, {"n_seeds": 2}]
    each = max(devices.kernel_estimate(p) for p in params)
    assert devices.kernels(None, False, 4, params) == (4, {})  # each notebook's default: cpu
    assert devices.kernels("cpu", False, 4, params) == (4, {})
    fake_card(5 * each)
    assert devices.kernels("cuda", True, 4, params) == (4, {})  # a cluster: its workers' own
    n, env = devices.kernels("cuda", False, 4, params)
    assert n == 2 and env == {devices.MEMORY_ENV: str(5 * each // 2)}
    n, env = devices.kernels("cuda", False, 4, params * 3)
    assert n == 4 and int(env[devices.MEMORY_ENV]) >= each
    # a notebook of no training configuration counts as the defaults', never crashes
    assert devices.kernel_estimate({"models_from": "x"}) > devices.CONTEXT_BYTES
    assert devices.kernel_estimate({"n_encoder_layers": 2, "n_decoder_layers": 2, "k": 3}) \
        > devices.CONTEXT_BYTES


def test_the_executor_of_a_card_is_sized_to_it(fake_card, monkeypatch) -> None:
    made = []
    monkeypatch.setattr(executors, "make_executor",
                        lambda scheduler, n, gpu=False: made.append((scheduler, n, gpu)))
    configs = [_grid_config()] * 5
    devices.executor(None, 4, "cpu", configs, 10)
    fake_card(2 * devices.estimate_bytes(configs[0], 10) + 1)
    devices.executor("local", 4, "cuda", configs, 10)
    assert made == [(None, 4, False), ("local", 2, True)]


def test_dask_tasks_ask_for_a_gpu() -> None:
    pytest.importorskip("distributed")
    with executors.make_executor("local", 1, gpu=True) as pool:
        assert pool.submit(sum, [1, 2]).result(timeout=60) == 3  # its worker holds GPU=1
        assert pool._executor._kwargs["resources"] == {"GPU": 1}


# ------------------------------------------------------------------------- the runner and CLI
def _notebook(path: Path, device: bool) -> Path:
    """A notebook that writes the device it was given and the memory share its kernel got."""
    nb = nbformat.v4.new_notebook()
    params = ('seed: int = 0  # any int\nrun_name: str = "x"  # injected\n'
              'results_dir: str = "scratch/x"  # injected\nnum_threads: int = 1  # injected')
    if device:
        params += '\ndevice: str = "cpu"  # where it trains'
    nb.cells = [nbformat.v4.new_code_cell(params, metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(
                    "import json, os\nfrom pathlib import Path\n"
                    "out = Path(os.environ['DYCKBOOK_ROOT']) / results_dir\n"
                    "out.mkdir(parents=True, exist_ok=True)\n"
                    "(out / 'seen.json').write_text(json.dumps({'device': globals().get("
                    f"'device'), 'memory': os.environ.get({devices.MEMORY_ENV!r})}}))")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


def _manifest(tmp_path: Path) -> Path:
    raw = {"version": 2, "chapters": {}, "notebooks": {
        "trains": {"path": str(_notebook(tmp_path / "trains.ipynb", True)), "title": "T",
                   "outputs": ["seen.json"]},
        "reads": {"path": str(_notebook(tmp_path / "reads.ipynb", False)), "title": "R",
                  "outputs": ["seen.json"]}},
        "runs": {"one": {"notebook": "trains"}, "two": {"notebook": "reads"}},
        "profiles": {"p": {"description": "both"}}}
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _seen(root: Path, group: str, run: str) -> tuple[dict, dict]:
    folder = root / "book" / "results" / "p" / group / run
    return (json.loads((folder / "seen.json").read_text()),
            json.loads((folder / "run.json").read_text()))


def test_the_runner_hands_the_device_to_the_notebooks_that_train(tmp_path, fake_card, caplog):
    m, root = _manifest(tmp_path), tmp_path / "root"
    with executors.make_executor(None, 1) as pool:
        assert runner.run("p", manifest=m, out_root=root, executor=pool, device="cpu") == 0
        seen, record = _seen(root, "trains", "one")
        assert seen == {"device": "cpu", "memory": None} and record["device"] == "cpu"
        seen, record = _seen(root, "reads", "two")
        assert seen["device"] is None and record["device"] is None  # it trains nothing
        # the device is provenance, not a recipe: without --device both are up to date
        caplog.clear()
        with caplog.at_level("INFO", logger="dyckbook.pipeline.runner"):
            assert runner.run("p", manifest=m, out_root=root, executor=pool) == 0
        assert sum("(up to date)" in r.getMessage() for r in caplog.records) == 2
        # a card (here a fake one): the notebook trains there, its kernel told its share
        fake_card(40 * GiB)
        assert runner.run("p", manifest=m, out_root=root, executor=pool, device="cuda",
                          force=True, jobs=2) == 0
        seen, record = _seen(root, "trains", "one")
        assert seen == {"device": "cuda", "memory": str(20 * GiB)}
        assert record["device"] == "cuda" and record["params"]["device"] == "cpu"
        assert runner.run_status(runner.resolve_profile(runner.load_manifest(m), "p")[0], {},
                                 root) == "ok"


def test_the_device_is_the_builds_never_a_manifests(tmp_path) -> None:
    m = _manifest(tmp_path)
    raw = yaml.safe_load(m.read_text())
    raw["profiles"]["p"]["params"] = {"device": "cuda"}
    m.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="'device' is the build's"):
        runner.load_manifest(m)


def test_the_command_line_names_a_bad_device(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--profile", "smoke", "--device", "gpu"])
    assert exit_.value.code == 2
    assert "--device must be one of cpu | cuda | cuda:N | auto" in capsys.readouterr().err


def test_a_card_executor_is_none_on_the_cpu() -> None:
    with devices.card_executor("cpu", [], 1) as executor:
        assert executor is None
    with pytest.raises(ValueError, match="device must be one of"):
        devices.card_executor("gpu", [], 1)
