"""What a run hands back: the grades read back from the gradebook and the records (``results``), grades.csv,
report.html and nbgrader's export (``report``), the instructor's insights (``insights``, ``insights_plots``), the LMS
import files (``lms_export``, ``lms_csv``), and the one CSV writer all of them use (``csv_cells``)."""
