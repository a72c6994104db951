"""nbgrader's pipeline as this course runs it: the preprocessors of ``autograder/nbgrader_config.py`` and the
feedback page's exporter. Everything here runs inside nbgrader's converters, one notebook at a time."""
