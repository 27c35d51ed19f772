"""weft's benchmarking tools (tools/metg and friends).

Modules:
  taskbench  parse the Task Bench summary block, name and launch the taskbench-<system> executables
  runner     run one command with a timeout, capturing its output
  progress   a plain-text progress bar for stderr
  metg       the METG computation (peak, efficiency, granularity, METG(p%)), the sweep, its outputs and CLI
  plotting   matplotlib set-up shared by the tools (Agg backend, no display needed)
"""
