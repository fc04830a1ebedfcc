-------------------------- MODULE MCNoClearWritten --------------------------
(* The redundancy check (sequentially consistent memory): the protocol     *)
(* WITHOUT WriterClearWritten's store (NCWWriterClearWritten stores        *)
(* nothing).  Expected: integrity and liveness still hold -- on the first  *)
(* lap written = 0 from Init keeps readers out; on later laps each         *)
(* reader's own read flag (= 1 until WriterClearReadFlag, which comes      *)
(* after the payload) keeps it out while the payload is stored.  What is   *)
(* lost is PublishedBeforeReadInv (MCNoClearWritten_Strict_R1C1): a reader *)
(* whose flag was just cleared sees the previous lap's written = 1.        *)
EXTENDS MC

NCWWriterClearWritten ==      \* no store
    /\ wpc = "clear"
    /\ wpc' = "fill"
    /\ UNCHANGED <<shared, windex, wflag, sent, aborts, rvars>>

NCWWriter == \/ WriterPollWritten \/ WriterPollReadFlag \/ NCWWriterClearWritten
             \/ WriterFillPayload \/ WriterAbort \/ WriterClearReadFlag
             \/ WriterPublish
NCWNext == NCWWriter \/ (\E r \in Readers : Reader(r)) \/ Done
NCWSpec == Init /\ [][NCWNext]_vars /\ WF_vars(NCWWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
