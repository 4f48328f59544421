"""Traces of a job's collectives (issue 26): every call a training job made, rank by rank, in
commbench's own trace directory (`trace`), or read from another tool's trace (`param`,
`flight_recorder`, `chakra`, chosen by `formats.load_any`), and the replay plan drawn from one
(`plan`). No torch here: a trace is read, checked and planned on any machine.

The modules, bottom up: `names` (the op and dtype names a call may carry), `trace` (the
records, the writer, the streaming reader and the checks every trace passes), the foreign
readers, `formats` (which reader a file is for, from its content), `plan`.
"""
