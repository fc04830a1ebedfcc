---------------------------- MODULE MutGlobalRank ----------------------------
(* Mutant (b2): a reader indexes its read flag by its global rank (writer  *)
(* = rank 0, readers = ranks 1..NReaders) instead of its local position    *)
(* (FlagIndex <- GlobalRankIndex in the cfg).                              *)
EXTENDS MC
=============================================================================
