"""The book's claims: the verdict rules (declared as data, each reading one run) and the
registered recipes they are judged against."""
