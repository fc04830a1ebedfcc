---------------------------- MODULE MutSkipAhead ----------------------------
(* Mutant (d): the writer does not insist on its own index: each poll      *)
(* starts at ANY chunk j (WriterPollWritten on j, then its read flags) and *)
(* writes there if j is free.  Readers still follow their own index.       *)
(* Expected: a reader receives a later message first (out of order).      *)
EXTENDS MC

MutWriterPollWritten ==
    /\ wpc = "poll"
    /\ \E j \in Chunks :
         /\ windex' = j
         /\ wpc' = IF written[j] = 0 THEN "clear" ELSE "pollflag"
    /\ UNCHANGED <<shared, wflag, sent, aborts, rvars>>

MutWriter == \/ MutWriterPollWritten \/ WriterPollReadFlag \/ WriterClearWritten
             \/ WriterFillPayload \/ WriterAbort \/ WriterClearReadFlag
             \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
