"""The fixture notebook here is opened by the browser test, not collected by nbval."""

collect_ignore_glob = ["*.ipynb"]
