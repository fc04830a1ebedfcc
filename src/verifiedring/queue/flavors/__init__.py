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
``arena``      large CPU tensors, through the shared tensor arena
=============  ===============================================================
"""
