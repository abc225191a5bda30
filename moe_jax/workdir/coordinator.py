"""Is a JAX coordinator listening at HOST:PORT? Asked before joining it; and
is its port free? Asked by process 0 before it starts one.

Process 0's `jax.distributed.initialize` starts the coordination service on
the port (every interface); where another program holds it, the process dies
of a segmentation fault inside XLA, with no word of why (`check_free`).

`jax.distributed.initialize` of a process other than 0 connects to process
0's coordination service (gRPC) and, where something else listens on that
port, waits its whole initialization_timeout (300 s) in silence, then aborts
the process with a long report. Asked first, the same mistake is a one-line
error within ANSWER_S seconds: a gRPC server is plaintext HTTP/2 here, which
answers the client preface with a SETTINGS frame at once. Nobody listening
yet (process 0 still starting) is retried until CONNECT_S.
"""
import socket
import time

from moe_jax.errors import RunError

ANSWER_S = 10.0     # something accepted the connection: it must answer within this
CONNECT_S = 300.0   # nothing listens yet: keep trying this long (JAX's own timeout)
_PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + bytes(9)   # + an empty SETTINGS frame
_SETTINGS = 4       # the frame type of the server's first frame


def _split(address):
  host, _, port = address.rpartition(':')
  try:
    return host.strip('[]') or 'localhost', int(port)
  except ValueError:
    raise RunError(f'coordinator address {address!r} is not HOST:PORT') from None


def check(address, answer_s=ANSWER_S, connect_s=CONNECT_S):
  """Returns once an HTTP/2 server answers at `address`; a RunError where
  nothing listens for `connect_s` seconds or what listens does not answer as
  one within `answer_s`."""
  host, port = _split(address)
  deadline = time.monotonic() + connect_s
  while True:
    try:
      conn = socket.create_connection((host, port), timeout=answer_s)
      break
    except (ConnectionRefusedError, socket.timeout) as e:
      if time.monotonic() > deadline:
        raise RunError(f'no coordinator at {address}: nothing accepted a connection in '
                       f'{connect_s:g} s ({e})') from None
      time.sleep(0.2)
    except OSError as e:
      raise RunError(f'coordinator {address}: cannot connect ({e})') from None
  with conn:
    try:
      conn.sendall(_PREFACE)
      head = conn.recv(9)
    except OSError:   # a timeout included
      head = b''
  if len(head) < 4 or head[3] != _SETTINGS:
    raise RunError(f'coordinator {address}: something listens there but is not a JAX '
                   f'coordinator (no gRPC answer in {answer_s:g} s); is the port another '
                   "program's, or process 0 of another run?")


def check_free(address):
  """Returns where this machine can listen on `address`'s port (on every
  interface, as JAX's coordination service does); a RunError naming the port
  where another program holds it."""
  _, port = _split(address)
  family, host = (socket.AF_INET6, '::') if socket.has_dualstack_ipv6() else (socket.AF_INET, '')
  with socket.socket(family, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # TIME_WAIT is no holder
    try:
      s.bind((host, port))
    except OSError as e:
      raise RunError(f'coordinator {address}: process 0 cannot listen on port {port} ({e.strerror}'
                     '); another program holds it: free it or choose another '
                     'mesh.coordinator_address') from None
