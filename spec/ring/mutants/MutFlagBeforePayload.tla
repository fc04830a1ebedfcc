------------------------ MODULE MutFlagBeforePayload ------------------------
(* Mutant: the reader stores its read flag = 1 BEFORE its caller loads the *)
(* payload (the release moved into __enter__).  Steps: poll, ReaderRelease *)
(* (store only), ReaderReadPayload (loads, then the index advances).       *)
(* Expected: the writer sees the ack, refills the chunk, and the reader    *)
(* loads a message being overwritten.                                      *)
EXTENDS MC

MutReaderRelease(r) ==        \* from "read": store the flag, loads still to come
    LET c == rindex[r] IN
    /\ rpc[r] = "read"
    /\ readFlag' = [readFlag EXCEPT ![c][FlagIndex(r)] = 1]
    /\ rpc' = [rpc EXCEPT ![r] = "release"]
    /\ UNCHANGED <<written, payload, wvars, rindex, delivered, raises>>

MutReaderReadPayload(r) ==    \* the caller's loads after the ack; then advance
    LET c == rindex[r]
        v == IF WriterFilling(c) THEN Torn ELSE payload[c]
    IN
    /\ rpc[r] = "release"
    /\ delivered' = [delivered EXCEPT ![r] = Append(@, v)]
    /\ rindex' = [rindex EXCEPT ![r] = Succ(c)]
    /\ rpc' = [rpc EXCEPT ![r] = IF Len(delivered'[r]) >= MaxMsgs
                                   THEN "done" ELSE "poll"]
    /\ UNCHANGED <<shared, wvars, raises>>

MutReader(r) == \/ ReaderPollReadFlag(r) \/ ReaderPollWritten(r)
                \/ MutReaderRelease(r) \/ MutReaderReadPayload(r)
MutNext == Writer \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(Writer)
           /\ \A r \in Readers : WF_vars(MutReader(r))
=============================================================================
