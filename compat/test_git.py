"""git and git-lfs against a real `openxet serve`, beside the stock Hub
clients (docs/git.md): a repo the clients made clones with the ids they
show, its large files come down through git-lfs, and what git pushes the
clients read back.
"""

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import MiB, HubClient, sha256_file, write_random

def _have_git():
    return shutil.which("git") is not None and subprocess.run(["git", "lfs", "version"], capture_output=True).returncode == 0


# Skipped without git and git-lfs, unless OPENXET_REQUIRE_GIT=1 (CI), which
# makes it fail instead.
pytestmark = pytest.mark.skipif(not _have_git() and os.environ.get("OPENXET_REQUIRE_GIT") != "1",
                                reason="git and git-lfs are not installed (.ci/run installs them)")


def git(home, *args, cwd=None):
    """git ARGS with HOME=home (its own ~/.gitconfig), no prompt."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "HF_"))}
    env.update({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                "GIT_AUTHOR_NAME": "Compat", "GIT_AUTHOR_EMAIL": "compat@example.com",
                "GIT_COMMITTER_NAME": "Compat", "GIT_COMMITTER_EMAIL": "compat@example.com"})
    r = subprocess.run(["git", *args], cwd=cwd or home, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"git {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout.strip()


def test_clone_is_what_the_clients_show_and_push_is_what_they_read(server, tmp_path):
    token = server.make_credential("gituser")
    client = HubClient(server.url, token, tmp_path / "client")
    repo = "gituser/model"
    client.api("create_repo", repo_id=repo)
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 64}\n')
    weights = folder / "sub" / "model.safetensors"
    want_sha = write_random(weights, 3 * MiB + 5, seed=48)
    client.api("upload_folder", folder_path=str(folder), repo_id=repo, commit_message="upload through Xet")
    info = client.api("model_info", repo_id=repo, files_metadata=True)

    home = tmp_path / "home"
    home.mkdir()
    git(home, "lfs", "install", "--skip-repo")
    host = urlsplit(server.url).netloc
    git(home, "clone", "-q", f"http://git:{token}@{host}/{repo}", "clone")
    work = home / "clone"
    assert git(home, "rev-parse", "HEAD", cwd=work) == info["sha"]
    assert sha256_file(work / "sub" / "model.safetensors") == want_sha  # smudged through git-lfs
    assert (work / "config.json").read_text() == '{"hidden_size": 64}\n'
    commits = client.api("list_repo_commits", repo_id=repo)
    assert git(home, "log", "--format=%H", cwd=work).split() == [c["commit_id"] for c in commits]
    for s in info["siblings"]:
        assert git(home, "rev-parse", "HEAD:" + s["rfilename"], cwd=work) == s["blob_id"], s

    # A push: a text file and a large file through git-lfs; the clients
    # read both back, under the id git made.
    (work / "README.md").write_text("# pushed with git\n")
    big = work / "sub" / "extra.bin"
    extra_sha = write_random(big, 2 * MiB, seed=49)
    git(home, "add", "-A", cwd=work)
    git(home, "commit", "-q", "-m", "Push with git", "-m", "and git-lfs", cwd=work)
    git(home, "push", "-q", "origin", "main", cwd=work)
    head = git(home, "rev-parse", "HEAD", cwd=work)
    assert client.api("model_info", repo_id=repo)["sha"] == head
    out = tmp_path / "download"
    path = client.api("hf_hub_download", repo_id=repo, filename="sub/extra.bin", local_dir=str(out))
    assert sha256_file(Path(path)) == extra_sha
    readme = client.api("hf_hub_download", repo_id=repo, filename="README.md", local_dir=str(out))
    assert Path(readme).read_text() == "# pushed with git\n"
    [newest, *_] = client.api("list_repo_commits", repo_id=repo)
    assert (newest["commit_id"], newest["title"], newest["message"]) == (head, "Push with git", "and git-lfs")
