"""The job document: what a user submits, read, checked and redacted before the scheduler keeps it.

Placement (``domain.capacity``, ``domain.placement``, ``domain.queue``, ``domain.reasons``, ...) stays
outside: it reads the parsed model only. The package's own ``__init__`` imports nothing: import the defining module.

- The document: :mod:`.model` (its typed shape), :mod:`.fields` (field paths), :mod:`.errors` (what a
  problem says), :mod:`.source` (where each field sits in the text), :mod:`.facts` (ranks, worker slots,
  the defaults filled before validation).
- Reading it: :mod:`.reader` (YAML/JSON text, bounded) and :mod:`.parsing` (``parse_job_document``).
- Checking it: :mod:`.validation` (``validate_job``, and the order of the section checks), with
  :mod:`.context` (what a document is judged against, the report), :mod:`.check` (one run's state) and
  one module per section: :mod:`.metadata`, :mod:`.lifecycle`, :mod:`.roles`, :mod:`.images`,
  :mod:`.mounts`, :mod:`.env`, :mod:`.feasibility`, :mod:`.rlinf`, :mod:`.redaction`.
"""
