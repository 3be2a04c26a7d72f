"""The book's chapters: one module per page whose analysis outgrows a notebook cell, named after
its notebook (``chapters.completion`` serves ``10_completion``), and what every page shares:
``page`` (its folder, glue, tables of runs) and the figures (``plotting``, ``attention_plots``,
``figure_style``). A chapter module imports the library and, of the pipeline, only what the
verdict chapter shows (``claims.registry``, ``claims.verdicts``)."""
