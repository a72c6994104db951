"""The kernel side of grading: what runs inside the sandbox or starts it. Copied whole into the kernel library
(``workspace.kernel_library``); it imports nothing else of the course."""
