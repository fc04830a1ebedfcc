------------------------- MODULE MutClearAllButLast -------------------------
(* Mutant: the writer clears every read flag but the last (an off-by-one  *)
(* in the clear loop, `range(n_reader - 1)`).  The last reader's ack from  *)
(* the previous lap survives.  Expected: its flag says "read" for a        *)
(* message it has not read (ReadFlagMeansReadInv); then it skips it and    *)
(* the writer overwrites it.                                               *)
EXTENDS MC

MutWriterClearReadFlag ==
    /\ wpc = "flags"
    /\ IF wflag = LastFlag
         THEN UNCHANGED readFlag                 \* the last store is missing
         ELSE readFlag' = [readFlag EXCEPT ![windex][wflag] = 0]
    /\ IF wflag = LastFlag
         THEN wpc' = "publish" /\ wflag' = 0
         ELSE wpc' = "flags" /\ wflag' = wflag + 1
    /\ UNCHANGED <<written, payload, windex, sent, aborts, rvars>>

MutWriter == \/ WriterPollWritten \/ WriterPollReadFlag \/ WriterClearWritten
             \/ WriterFillPayload \/ WriterAbort \/ MutWriterClearReadFlag
             \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
