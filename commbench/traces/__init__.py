"""Traces of a job's collectives (issue 26): every call a training job made, rank by rank, in
commbench's own trace directory (`records`), or read from another tool's trace (`param`,
`flight_recorder`, `chakra`, chosen by `formats.load_any`), and the replay plan drawn from one
(`plan`). No torch here: a trace is read, checked and planned on any machine.

The modules, bottom up: `names` (the op and dtype names a call may carry), `records` (the
manifest, the calls, their limits), `splits` (an all_to_all's), `checks` (what every trace
passes), `writer`, `reader` (the streaming reader), the foreign readers, `formats` (which
reader a file is for, from its content), `plan`.
"""
