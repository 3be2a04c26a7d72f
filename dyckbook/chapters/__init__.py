"""The book's chapters: one module per page whose analysis outgrows a notebook cell, named after
its notebook (``chapters.completion`` serves ``10_completion``), and ``page``, what every page
does (its folder, glue, tables of runs). A chapter module imports the library, never the
pipeline."""
