"""workdir/placement.py's reading of the launcher's MOE_JAX_* variables
(moe_jax/multiprocess.py sets them): one parse for process_count and
initialize, a bad value a one-line ConfigError naming the variable."""
import socket

import pytest

from configs import common
from moe_jax.errors import ConfigError, RunError
from moe_jax.workdir import placement


@pytest.fixture
def env(monkeypatch):
  def set_(address='localhost:1234', count='2', index='1'):
    for name, value in ((placement.ENV_ADDRESS, address), (placement.ENV_COUNT, count),
                        (placement.ENV_INDEX, index)):
      monkeypatch.setenv(name, value)
  for name in (placement.ENV_ADDRESS, placement.ENV_COUNT, placement.ENV_INDEX):
    monkeypatch.delenv(name, raising=False)
  return set_


def test_process_count_from_the_launcher(env):
  assert placement.process_count(common.mesh()) == 1
  env()
  assert placement.process_count(common.mesh()) == 2
  mesh = common.mesh()
  mesh.num_processes = 4
  assert placement.process_count(mesh) == 4   # the config names it


@pytest.mark.parametrize('name, count, index', [
    ('MOE_JAX_NUM_PROCESSES', 'two', '1'), ('MOE_JAX_PROCESS_ID', '2', '')])
def test_a_bad_variable_is_named(env, name, count, index):
  env(count=count, index=index)
  with pytest.raises(ConfigError, match=f'^{name}=.* must be an integer$'):
    placement.process_count(common.mesh())


def test_initialize_checks_the_launcher_values_before_joining(env):
  env(count='2', index='5')
  with pytest.raises(ConfigError, match=r"coordinator_address='localhost:1234', "
                     r'mesh.num_processes=2, mesh.process_id=5'):
    placement.initialize(common.mesh())


def test_process_0_refuses_a_coordinator_port_another_program_holds(env, monkeypatch):
  def initialize(*_):   # where JAX segfaults
    raise AssertionError('jax.distributed.initialize was called')
  monkeypatch.setattr(placement.jax.distributed, 'initialize', initialize)
  monkeypatch.setattr(placement.jax.config, 'update', lambda *_: None)   # no gloo here
  with socket.socket() as held:
    held.bind(('localhost', 0))
    held.listen()
    port = held.getsockname()[1]
    env(address=f'localhost:{port}', count='2', index='0')
    with pytest.raises(RunError, match=f'^coordinator localhost:{port}: process 0 cannot '
                       f'listen on port {port} .*another program holds it'):
      placement.initialize(common.mesh())
