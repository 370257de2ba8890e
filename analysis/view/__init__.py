"""A view over the databases a reader names, one host's or a cluster's many: the library that
the command line only calls, so that anything else can read a cluster view without it.

``reader`` opens the view (``open_view``: the files, the filters, the moment looked at) and
answers what every read asks of it; ``opened_files`` opens a cluster's files, split between
processes where there are many; ``service_states`` says what runs behind each file (running,
collecting, preparing, stopped); ``unknown_names`` finds the names asked for that no file
knows. Nothing here parses options or writes output: errors are ``reader.ViewError``.
"""
