NAME = "pkg_wd"
