"""What the grading command is handed, read before anything is graded: the class folder or zip read into a roster
of each student's notebook per lesson (``class_folder``; the roster itself: ``class_roster``), the layouts of the LMS
downloads it understands (``lms_layouts``), each student's id made from the folder's name (``student_ids``; names
that look alike: ``look_alike``), the files read without trusting them (``file_access``) within limits
(``size_limits``), a zip unpacked within them (``archives``), the proof the originals were left untouched
(``integrity``), and the static scan of a submission's code for what a human should look at (``code_scan``). Nothing
here runs a notebook or writes a record."""
