"""The pipeline from manifest to page: the run manifest, the papermill runner, the published
tree, the pages a book build reads, the executors, the checks a notebook makes of its
parameters, and the command line. It may import the library and the chapters; neither imports
it."""
