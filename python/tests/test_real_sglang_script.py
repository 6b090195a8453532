"""The parts of `scripts/real_sglang.py` that run without installing SGLang: which requirements it installs, the
stand-ins for GPU kernel modules and the start-up patch. (Installing and starting a release takes 7 GB and
minutes, so the README's test command does not; the script's docstring says how it was checked.)"""

import importlib.util
import os
import subprocess
import sys
import textwrap
import zipfile

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "real_sglang.py")


def load_script():
    spec = importlib.util.spec_from_file_location("real_sglang", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_requirements_drop_extras_and_cuda_only_packages(tmp_path):
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    metadata = textwrap.dedent("""\
        Metadata-Version: 2.1
        Name: sglang
        Version: 9.9.9
        Requires-Dist: aiohttp
        Requires-Dist: torch==2.14.1
        Requires-Dist: sglang-kernel==0.4.10
        Requires-Dist: flashinfer_python[cu13]==0.7.2
        Requires-Dist: nvidia-cutlass-dsl[cu13]==4.8.0
        Requires-Dist: torch_memory_saver>=0.0.9.post1
        Requires-Dist: decord2; sys_platform == "linux" and platform_machine == "aarch64"
        Requires-Dist: pytest; extra == "test"
        Requires-Dist: xgrammar==0.2.7
        """)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang-9.9.9.dist-info/METADATA", metadata)
    assert load_script().requirements(str(wheel)) == [
        "aiohttp",
        "torch==2.14.1",
        'decord2; sys_platform == "linux" and platform_machine == "aarch64"',
        "xgrammar==0.2.7",
    ]


def test_stand_ins_answer_kernel_imports_raise_when_called_and_patch_start_up(tmp_path):
    standins = tmp_path / "sglang_cpu_standins.py"
    standins.write_text(load_script().STANDINS)
    # A module the start-up patch replaces a function of, at the path the release has it.
    package = tmp_path / "sglang" / "srt" / "mem_cache" / "pool_host"
    package.mkdir(parents=True)
    for level in [tmp_path / "sglang", tmp_path / "sglang" / "srt", tmp_path / "sglang" / "srt" / "mem_cache", package]:
        (level / "__init__.py").write_text("")
    (package / "common.py").write_text("def _cuda_host_register(buffer):\n    raise RuntimeError('no driver')\n")
    capturer = tmp_path / "sglang" / "srt" / "state_capturer"
    capturer.mkdir()
    (capturer / "__init__.py").write_text("")
    # A `torch` that records whether it was asked to pin.
    (capturer / "base.py").write_text(
        "import types\n"
        "torch = types.SimpleNamespace(zeros=lambda *shape, pin_memory=False, **kw: ('zeros', pin_memory),\n"
        "                              int32='int32')\n")
    check = textwrap.dedent("""\
        import sglang_cpu_standins
        import sgl_kernel
        from sgl_kernel.flash_attn import flash_attn_varlen_func
        try:
            flash_attn_varlen_func(1, 2)
        except RuntimeError as err:
            assert "stand-in" in str(err), err
        else:
            raise AssertionError("a stand-in kernel returned")
        class Layer(sgl_kernel.SomeBase):
            pass
        from sglang.srt.mem_cache.pool_host import common
        assert common._cuda_host_register(object()) is None
        from sglang.srt.state_capturer import base
        assert base.torch.zeros(4, 2, pin_memory=True) == ("zeros", False)
        assert base.torch.int32 == "int32"
        print("ok")
        """)
    result = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
