------------------------ MODULE MutSkipAheadWhenBusy ------------------------
(* Variant of (d) that skips only when its own chunk is busy: a poll that  *)
(* fails (a read flag 0) moves the writer on to the next chunk, and the    *)
(* next poll tries that one.  With an atomic poll this was dead code (no   *)
(* later chunk is free while the own one is busy).  With a poll of N + 1   *)
(* separate loads it is not: both chunks can become free between the      *)
(* failed poll and the next one, and the writer writes the later chunk     *)
(* first.  Expected: messages out of order.                                *)
EXTENDS MC

MutWriterPollReadFlag ==
    /\ wpc = "pollflag"
    /\ IF readFlag[windex][wflag] = 0
         THEN wpc' = "poll" /\ wflag' = 0 /\ windex' = Succ(windex)
       ELSE IF wflag = LastFlag
         THEN wpc' = "clear" /\ wflag' = 0 /\ UNCHANGED windex
         ELSE wpc' = "pollflag" /\ wflag' = wflag + 1 /\ UNCHANGED windex
    /\ UNCHANGED <<shared, sent, aborts, rvars>>

MutWriter == \/ WriterPollWritten \/ MutWriterPollReadFlag \/ WriterClearWritten
             \/ WriterFillPayload \/ WriterAbort \/ WriterClearReadFlag
             \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
