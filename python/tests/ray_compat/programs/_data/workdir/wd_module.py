VALUE = "from working_dir"


def double(x):
    return 2 * x
