def greet(name):
    return f"hello {name} from py_modules"
