"""Tables (CSV, Markdown, LaTeX) with published values beside ours, and seaborn figures."""
