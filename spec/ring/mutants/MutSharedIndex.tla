--------------------------- MODULE MutSharedIndex ---------------------------
(* Mutant (b1): two readers use the same read-flag index (FlagIndex <-     *)
(* SharedIndex in the cfg).  The protocol actions are RingBuffer's own.    *)
EXTENDS MC
=============================================================================
