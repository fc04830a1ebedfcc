--------------------------- MODULE MutShiftedIndex ---------------------------
(* Mutant: every reader's flag index is shifted by one, wrapping around    *)
(* (FlagIndex <- ShiftedIndex in the cfg): reader r polls and stores flag  *)
(* byte (r + 1) % NReaders.  A consistent permutation, so delivery itself  *)
(* survives; but flag byte i no longer says whether reader i has read the  *)
(* chunk (the writer's unread_by() diagnostics lie, and one correct reader *)
(* next to shifted ones shares a byte).  Expected: ReadFlagMeansReadInv.   *)
EXTENDS MC
=============================================================================
