"""Work more alike than a class makes likely, found from what grading recorded, for the instructor to look at
(``similarity.html``, ``similarity.csv``): fingerprints of the learner's normalised code (``code_prints``), the
evidence each graded notebook carries (``evidence``) and the pairs and groups that share rare evidence (``pairs``)."""
