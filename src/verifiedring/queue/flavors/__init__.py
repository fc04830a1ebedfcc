"""The ways a message reaches local readers, each with its writer half and reader half.

=============  ===============================================================
flavor         what it delivers
=============  ===============================================================
inline         a message that fits one chunk, whole in it: the local
               transmitter's and the local reader's own path, one call into
               :mod:`..wire` each side (``encode_chunk`` / ``decode_chunk``)
``overflow``   a larger one (``large_objects="socket"``): a marker in the
               ring, the object as a frame on the local socket
``run``        a larger one (``large_objects="stream"``): a run of chunks,
               pickled into and unpickled out of the ring
=============  ===============================================================

Beside them, a local reader's control channel (:mod:`.control`: the socket the
writer's READY, SHUTDOWN, BROKEN and overflow frames arrive on). The tensor arena is
no flavor: it is a plug-in of the serializer (:mod:`..serialization`) and composes
with all three.
"""
