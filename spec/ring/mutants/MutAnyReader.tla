---------------------------- MODULE MutAnyReader ----------------------------
(* Mutant (e): the writer's poll treats the chunk as free when ANY reader  *)
(* (not all) has acknowledged it: the first read flag it loads as 1 ends   *)
(* the poll with "free"; only all 0 fails it.  Expected: the writer        *)
(* overwrites a chunk a slower reader has not read.                        *)
EXTENDS MC

MutWriterPollReadFlag ==
    /\ wpc = "pollflag"
    /\ IF readFlag[windex][wflag] = 1
         THEN wpc' = "clear" /\ wflag' = 0
       ELSE IF wflag = LastFlag
         THEN wpc' = "poll" /\ wflag' = 0
         ELSE wpc' = "pollflag" /\ wflag' = wflag + 1
    /\ UNCHANGED <<shared, windex, sent, aborts, rvars>>

MutWriter == \/ WriterPollWritten \/ MutWriterPollReadFlag \/ WriterClearWritten
             \/ WriterFillPayload \/ WriterAbort \/ WriterClearReadFlag
             \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
