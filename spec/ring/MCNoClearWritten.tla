-------------------------- MODULE MCNoClearWritten --------------------------
(* The redundancy check (sequentially consistent memory): the protocol     *)
(* WITHOUT WriterClearWritten's store (NCWWriterClearWritten stores        *)
(* nothing).  Found: it is not redundant.  A write interrupted inside      *)
(* __exit__ after clearing a reader's flag (WriterAbort in the "flags"     *)
(* state: an asynchronous exception at the loop's back edge or a fence     *)
(* call) leaves the previous lap's written = 1 beside a partial payload,   *)
(* and that reader consumes it: NoTornReadInv (MCNoClearWritten_R2C2,      *)
(* _R3C1, _R1C3).  Also lost is PublishedBeforeReadInv                     *)
(* (MCNoClearWritten_Strict_R1C1): a reader whose flag was just cleared    *)
(* sees the previous lap's written = 1.                                    *)
EXTENDS MC

NCWWriterClearWritten ==      \* no store
    /\ wpc = "clear"
    /\ wpc' = "fill"
    /\ UNCHANGED <<shared, windex, wflag, sent, aborts, rvars>>

NCWWriter == \/ WriterPollWritten \/ WriterPollReadFlag \/ NCWWriterClearWritten
             \/ WriterFillPayload \/ WriterAbort \/ WriterClearReadFlag
             \/ WriterPublish \/ WriterExitCut
NCWNext == NCWWriter \/ (\E r \in Readers : Reader(r)) \/ Done
NCWSpec == Init /\ [][NCWNext]_vars /\ WF_vars(NCWWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
