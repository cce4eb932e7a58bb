"""Many runs: sweep points from a file, a Parquet store of their rows, and the runner.

(Named ``sweeping`` because ``tiersim.sweep`` is the function notebooks call.)"""
