"""`commbench diagnose`: find the one slow node, GPU or link of a cluster.

The rooms import one way, bottom up (every import counts, at module top or inside a
function; tests/test_import_map.py keeps the same order between packages):

1. `plan` (the planner: which units each round tests, and the decision), `journal` (the
   stages' names and a test's line of events.jsonl), `verdict` (what a diagnosis concludes,
   diagnosis.json) and `muster` (the nodes signing in): they import no other room.
2. `expectations`: an expectations file, or a good run's journal, as GB/s per stage.
3. `settings`: what the command asks for, reading its expectations.
4. `stages`: the stages over a cluster's layout, planned from the settings.
5. `heatmap`: a stage's pair tests as a figure (drawn by `commbench.heatmap`).
6. `run` (the launcher's side: launch, replay the journal, conclude, write) and `worker`
   (the side torchrun starts: run the stages, journal each test).
7. `render`: a verdict as a table, markdown, JSON or JUnit.

A record two rooms share lives below both: the worker writes a `journal.RecordedTest` that
`run` replays and `expectations` reads, and `run` concludes a `verdict.Diagnosis` that
`render` shows.
"""
