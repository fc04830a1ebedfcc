------------------------- MODULE MutNoReleaseOnRaise -------------------------
(* Mutant (c): when the reader's caller raises inside the read, the reader *)
(* does not release the chunk (no flag store, no index advance -- a        *)
(* context manager without try/finally).  Expected: the next read polls    *)
(* the same chunk, finds its flag still 0 and delivers the message again.  *)
EXTENDS MC

MutReaderRelease(r) ==
    \/ /\ rpc[r] = "release"
       /\ ReaderRelease(r)
    \/ /\ rpc[r] = "raised"               \* skipped: back to polling
       /\ rpc' = [rpc EXCEPT ![r] = "poll"]
       /\ UNCHANGED <<shared, wvars, rindex, delivered, raises>>

MutReader(r) == \/ ReaderPollReadFlag(r) \/ ReaderPollWritten(r)
                \/ ReaderReadPayload(r) \/ MutReaderRelease(r)
MutNext == Writer \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(Writer)
           /\ \A r \in Readers : WF_vars(MutReader(r))
=============================================================================
