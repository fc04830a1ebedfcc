-------------------------- MODULE MCNoClearWritten --------------------------
(* The redundancy check (sequentially consistent memory): the protocol     *)
(* WITHOUT WriterClearWritten.  WriterPoll goes straight to the payload.   *)
(* Expected: every invariant and property still holds -- on the first lap  *)
(* written = 0 from Init keeps readers out; on later laps each reader's    *)
(* own read flag (= 1 until WriterClearReadFlag, which comes after the     *)
(* payload) keeps it out while the payload is stored.                      *)
EXTENDS MC

NCWWriterPoll ==
    /\ wpc = "poll"
    /\ IF ChunkFree(windex) THEN wpc' = "fill" ELSE UNCHANGED wpc
    /\ UNCHANGED <<shared, windex, toClear, sent, aborts, rvars>>

NCWWriter == \/ NCWWriterPoll \/ WriterFillPayload \/ WriterAbort
             \/ WriterClearReadFlag \/ WriterPublish
NCWNext == NCWWriter \/ (\E r \in Readers : Reader(r)) \/ Done
NCWSpec == Init /\ [][NCWNext]_vars /\ WF_vars(NCWWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
