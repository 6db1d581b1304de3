"""The report: the page, the head and layer atlases, and the claims table. Never imports torch."""
