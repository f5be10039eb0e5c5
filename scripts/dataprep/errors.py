"""errors.py: the one exception of data preparation: a problem with the user's input or output, whose message names
the file (or dataset, or flag) and the problem; prepare_data.py prints it and exits with status 1."""


class PrepError(Exception):
    pass
