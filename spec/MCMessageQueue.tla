--------------------------- MODULE MCMessageQueue ---------------------------
(* Bounded harness for MessageQueue.tla: readers are model values named in  *)
(* the .cfg files; every other constant is set there too.                   *)
EXTENDS MessageQueue
=============================================================================
