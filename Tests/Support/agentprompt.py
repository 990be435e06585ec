"""One-shot nh-agent commands that talk with a person on standard input and output, as `nh-agent
pair` and `pair accept` do: started here, read line by line, answered.

    joining = spawn(env, "pair")
    code = after(joining, "Pairing code:")
    ...
    answer(joining, "y")
    finish(joining)        # its output, once it exited 0
"""
import os
import subprocess

from hubharness import BIN


def spawn(env, *arguments):
    """nh-agent with `arguments`, its standard input, output and error piped, line by line."""
    return subprocess.Popen([os.path.join(BIN, "nh-agent"), *arguments], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)


def after(process, prefix):
    """What follows `prefix` on the first line of the output that starts with it."""
    for line in process.stdout:
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise AssertionError(f"no line starting {prefix!r}; standard error: {process.stderr.read()}")


def answer(process, text):
    process.stdin.write(text + "\n")
    process.stdin.flush()


def finish(process, timeout=60):
    """The rest of the output and error, once the command exited 0."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, out + err
    return out + err
