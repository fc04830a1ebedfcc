------------------------- MODULE MutReleaseNextChunk -------------------------
(* Mutant: ReaderRelease stores the reader's flag of the NEXT chunk (the   *)
(* index is advanced before the store).  With one chunk this is the        *)
(* correct protocol; from two chunks on, the flag set on chunk c + 1 acks  *)
(* a message the reader has not read.  Expected: ReadFlagMeansReadInv, a  *)
(* safety violation (the hang that follows is a liveness one).             *)
EXTENDS MC

MutReaderRelease(r) ==
    LET c == rindex[r] IN
    /\ rpc[r] \in {"release", "raised"}
    /\ readFlag' = [readFlag EXCEPT ![Succ(c)][FlagIndex(r)] = 1]
    /\ rindex' = [rindex EXCEPT ![r] = Succ(c)]
    /\ rpc' = [rpc EXCEPT ![r] = IF Len(delivered[r]) >= MaxMsgs
                                   THEN "done" ELSE "poll"]
    /\ UNCHANGED <<written, payload, wvars, delivered, raises>>

MutReader(r) == \/ ReaderPollReadFlag(r) \/ ReaderPollWritten(r)
                \/ ReaderReadPayload(r) \/ MutReaderRelease(r)
MutNext == Writer \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(Writer)
           /\ \A r \in Readers : WF_vars(MutReader(r))
=============================================================================
