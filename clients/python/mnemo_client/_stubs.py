"""Loads the generated protobuf/gRPC modules (see ../generate_stubs.sh).

protoc writes absolute imports (``from mnemo.v1 import generation_pb2``), so the generated
folder goes on sys.path. If the stubs are missing (a fresh checkout), they are generated once.
"""

import os
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_GENERATED = os.path.join(_HERE, "_generated")
_SCRIPT = os.path.join(os.path.dirname(_HERE), "generate_stubs.sh")

# Every module imported below; stubs generated before a .proto was added lack its module.
_REQUIRED = ("generation_pb2.py", "models_pb2.py", "sessions_pb2.py", "datastores_pb2.py")
if not all(os.path.isfile(os.path.join(_GENERATED, "mnemo", "v1", name)) for name in _REQUIRED):
    if not os.path.isfile(_SCRIPT):
        raise ImportError("mnemo_client: generated stubs missing and generate_stubs.sh not found")
    subprocess.run(["bash", _SCRIPT], check=True, stdout=sys.stderr)

if _GENERATED not in sys.path:
    sys.path.insert(0, _GENERATED)

# pylint: disable=wrong-import-position,unused-import
from mnemo.v1 import datastores_pb2, datastores_pb2_grpc  # noqa: E402,F401
from mnemo.v1 import generation_pb2, generation_pb2_grpc  # noqa: E402,F401
from mnemo.v1 import models_pb2, models_pb2_grpc  # noqa: E402,F401
from mnemo.v1 import sessions_pb2, sessions_pb2_grpc  # noqa: E402,F401
from mnemo_grpc_std import health_pb2, health_pb2_grpc  # noqa: E402,F401
from mnemo_grpc_std import reflection_pb2, reflection_pb2_grpc  # noqa: E402,F401
