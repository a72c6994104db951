"""What a run keeps and decides about each notebook: the run's settings and exit statuses (``settings``), the
gradebook, its URL and its check before use (``gradebook``, ``dburl``, ``dbcheck``), each (student, lesson) record
(``state``), its status and flags (``outcome``, ``findings``), what its tests and written answers say (``items``) and
the instructor's marks, carried over a regrade (``marks``)."""
