"""The annotation page, driven in headless Chromium (Debian's chromium) through Playwright."""

from __future__ import annotations

import numpy as np

from bertology_core.patterns.annotation import annotation_page, encode_map


def test_encode_map_downsamples_and_keeps_structure():
    attention = np.zeros((100, 100), dtype=np.float32)
    attention[:, 0] = 1.0
    encoded = encode_map(attention, max_side=64)
    assert encoded["side"] == 50  # 100 -> blocks of 2
    import base64

    pixels = np.frombuffer(base64.b64decode(encoded["pixels"]), dtype=np.uint8).reshape(50, 50)
    assert pixels[:, 0].min() > 0 and pixels[:, 1:].max() == 0


def items(n=4):
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        attention = rng.random((10, 10))
        attention /= attention.sum(axis=1, keepdims=True)
        out.append({"task": "MRPC", "state": "pretrained", "idx": 100 + i, "layer": i % 2, "head": 3, "tokens": ["[CLS]", "a", "</script>"],
                    **encode_map(attention)})
    return out


def test_label_with_keys_export_and_import_in_headless_chromium(browser, tmp_path):
    page_file = tmp_path / "annotate.html"
    page_file.write_text(annotation_page(items()))
    page = browser.new_page(accept_downloads=True)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_file.as_uri())
    assert page.text_content("#progress") == "0 of 4 labelled"
    assert page.locator("#strip canvas").count() == 4
    page.keyboard.press("2")  # map 0 -> diagonal, moves to map 1
    page.keyboard.press("1")  # map 1 -> vertical
    page.keyboard.press("ArrowRight")  # skip map 2
    page.keyboard.press("5")  # map 3 -> heterogeneous
    assert page.text_content("#progress") == "3 of 4 labelled"
    with page.expect_download() as download:
        page.click("#export")
    exported = (tmp_path / "labels.csv")
    download.value.save_as(exported)
    assert exported.read_text() == (
        "task,state,idx,layer,head,label\n"
        "MRPC,pretrained,100,0,3,diagonal\n"
        "MRPC,pretrained,101,1,3,vertical\n"
        "MRPC,pretrained,103,1,3,heterogeneous\n"
    )
    from bertology_core.patterns import label_tables  # the export is what the labels reader takes

    assert label_tables.read_labels(exported)["label"].to_list() == ["diagonal", "vertical", "heterogeneous"]
    # a fresh browser context (no localStorage) imports the CSV and shows the same labels
    other = browser.new_context().new_page()
    other.goto(page_file.as_uri())
    assert other.text_content("#progress") == "0 of 4 labelled"
    other.set_input_files("#import", str(exported))
    other.wait_for_function("document.getElementById('progress').textContent.startsWith('3 of')")
    assert other.text_content("#label") == "label: diagonal"
    assert errors == []
