---------------------------- MODULE MutExitCutHeld ----------------------------
(* Mutant: the code before the leases.  The cursor was its own context     *)
(* manager; an asynchronous exception at the entry of its __exit__ (after  *)
(* the body) skipped the exit whole and nothing let the chunk go: the      *)
(* writer's cursor stayed "held" and refused every later acquire_write,    *)
(* and a reader's chunk stayed taken, never released.  The cfg replaces    *)
(* RingBuffer's ExitCutLetsGo by Never.  Expected: the run never ends.     *)
EXTENDS MC

Never == FALSE
=============================================================================
