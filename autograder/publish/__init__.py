"""Everything the course publishes, each file generated from its one source: the student notebooks
(``lessons/``), the learner bundle, the Binder environment, the answer key and the bug table."""
