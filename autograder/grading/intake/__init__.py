"""What the grading command is handed, read before anything is graded: the class folder or zip read into a roster
of each student's notebook per lesson, with student ids made from the folders' names and the originals proven
untouched (``class_folder``); the layouts of the LMS downloads it understands (``lms_layouts``); folder names that
look alike (``look_alike``); and the static scan of a submission's code for what a human should look at
(``code_scan``). Nothing here runs a notebook or writes a record."""
