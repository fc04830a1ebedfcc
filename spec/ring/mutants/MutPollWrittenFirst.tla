------------------------- MODULE MutPollWrittenFirst -------------------------
(* Review finding (a): the reader's two poll loads in the OLD order --     *)
(* `written` first, then its own read flag -- under sequentially           *)
(* consistent memory.  A stale written = 1 from the chunk's previous lap,  *)
(* then the own flag just cleared by the writer (after the new payload,    *)
(* before WriterPublish), lets the reader consume the message before it is *)
(* published.  Expected: PublishedBeforeReadInv (integrity holds: the      *)
(* payload is complete when the flag is cleared).                          *)
EXTENDS MC

MutReaderPollWritten(r) ==    \* first load: written
    LET c == rindex[r] IN
    /\ rpc[r] = "poll"
    /\ IF written[c] = 1
         THEN rpc' = [rpc EXCEPT ![r] = "poll2"]
         ELSE UNCHANGED rpc
    /\ UNCHANGED <<shared, wvars, rindex, delivered, raises>>

MutReaderPollReadFlag(r) ==   \* second load: the own flag
    LET c == rindex[r] IN
    /\ rpc[r] = "poll2"
    /\ rpc' = [rpc EXCEPT ![r] = IF readFlag[c][FlagIndex(r)] = 0
                                   THEN "read" ELSE "poll"]
    /\ UNCHANGED <<shared, wvars, rindex, delivered, raises>>

MutReader(r) == \/ MutReaderPollWritten(r) \/ MutReaderPollReadFlag(r)
                \/ ReaderReadPayload(r) \/ ReaderRelease(r)
MutNext == Writer \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(Writer)
           /\ \A r \in Readers : WF_vars(MutReader(r))
=============================================================================
