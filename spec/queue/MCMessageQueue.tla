--------------------------- MODULE MCMessageQueue ---------------------------
(* Bounded harness for MessageQueue.tla: readers are model values named in  *)
(* the .cfg files; every other constant is set there too.                   *)
EXTENDS MessageQueue

(* State constraints (a cfg's CONSTRAINT) that keep one of a mutant's      *)
(* windows: the run writer's bookkeeping cut only after a MORE, only after *)
(* a LAST, only after the due ABORT of a cut run.                          *)
CutOnlyAfterMore == wcut \in {"none", "more"}
CutOnlyAfterLast == wcut \in {"none", "last"}
CutOnlyAfterAbort == wcut \in {"none", "abort"}
=============================================================================
