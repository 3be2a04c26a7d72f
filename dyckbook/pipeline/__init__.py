"""The pipeline from manifest to page: the run manifest, the papermill runner, the published
tree, the pages a book build reads, the executors, the checks a notebook makes of its
parameters, the book's claims and the rules that judge them (``verdicts``), the registered
recipes (``registry``), and the command line. It may import the library and the chapters; the
library never imports it, and a chapter only its judging modules."""
