"""tools/migrate_state_names.py: the former model-state names in hand-label files and label cards renamed, nothing else."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_the_migration_script_renames_only_former_state_names_and_is_idempotent(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_bytes(b"task,state,idx,layer,head,label,sample\r\nMRPC,untuned,3,0,1,vertical,random\r\n"
                       b"MRPC,pretrained_seed1,3,0,1,diagonal,untuned\r\nRTE,random_seed2,4,1,0,block,\r\n"
                       b"RTE,pretrained,4,1,0,block,\r\n")
    card = tmp_path / "m.json"
    card_text = ('{\n  "model_spec": "x",\n  "labels": "labels.csv",\n  "states": {\n    "MRPC/pretrained_seed1": "abc"\n  },\n'
                 '  "method": "states untuned and pretrained_seed1"\n}\n')
    card.write_text(card_text)
    script = [sys.executable, str(REPO / "tools" / "migrate_state_names.py")]
    assert subprocess.run([*script, "--check", str(tmp_path)]).returncode == 1
    subprocess.run([*script, str(tmp_path)], check=True)
    # the state column only (not the sample column), line endings kept; an already new name stays
    assert labels.read_bytes() == (b"task,state,idx,layer,head,label,sample\r\nMRPC,pretrained,3,0,1,vertical,random\r\n"
                                   b"MRPC,finetuned_seed1,3,0,1,diagonal,untuned\r\nRTE,scratch_seed2,4,1,0,block,\r\n"
                                   b"RTE,pretrained,4,1,0,block,\r\n")
    assert card.read_text() == card_text.replace('"MRPC/pretrained_seed1":', '"MRPC/finetuned_seed1":')  # the text is kept
    assert subprocess.run([*script, "--check", str(tmp_path)]).returncode == 0
