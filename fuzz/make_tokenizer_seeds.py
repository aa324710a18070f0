"""Writes fuzz/corpus/tokenizer_fuzz/: small tokenizer folders in tokenizer_fuzz's input format
(tokenizer.json, NUL, tokenizer_config.json, NUL, generation_config.json).

Two kinds of seed:
  - the test models' tokenizers (tests/data/hf/*), cut down to their base alphabet plus the
    first merges and renumbered densely, with their config files' ids renumbered to match:
    real pipelines (byte-level BPE, Metaspace with byte fallback, a Split regex) that load in
    microseconds instead of milliseconds;
  - hand-written folders for the components no test model uses (normalizers, Bert/Roberta
    post-processors, added-token flags, string merges, unk tokens).

Usage: python3 fuzz/make_tokenizer_seeds.py REPO_ROOT OUT_DIR (fuzz/make_seeds.sh runs it).
"""
import json
import os
import sys

MERGES_KEPT = 160


def byte_level_alphabet():
    """The 256 characters GPT-2's byte-level encoding maps bytes to."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def cut_down(tokenizer):
    """`tokenizer` with a base alphabet, its first MERGES_KEPT usable merges, and dense ids.

    Returns (tokenizer, old id -> new id)."""
    model = tokenizer["model"]
    vocab = model["vocab"]
    if model.get("byte_fallback"):
        base = [t for t in vocab if t.startswith("<0x") or len(t) == 1]
    else:
        base = [t for t in byte_level_alphabet() if t in vocab]
    kept = set(base)
    merges = []
    for merge in model["merges"]:
        left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
        if left in kept and right in kept and left + right in vocab:
            merges.append([left, right])
            kept.add(left + right)
            if len(merges) == MERGES_KEPT:
                break
    order = sorted(kept, key=lambda t: vocab[t])
    added = sorted(tokenizer["added_tokens"], key=lambda a: a["id"])
    # Added tokens that are also vocabulary entries (Llama's <unk>, <s>, </s>) keep that entry.
    for a in added:
        if a["content"] in vocab and a["content"] not in kept:
            order.insert(0, a["content"])
            kept.add(a["content"])
    order.sort(key=lambda t: vocab[t])
    remap = {vocab[t]: i for i, t in enumerate(order)}
    next_id = len(order)
    for a in added:
        if a["id"] not in remap:
            remap[a["id"]] = next_id
            next_id += 1
        a["id"] = remap[a["id"]]
    model["vocab"] = {t: remap[vocab[t]] for t in order}
    model["merges"] = merges
    tokenizer["added_tokens"] = added
    post = tokenizer.get("post_processor") or {}
    for special in (post.get("special_tokens") or {}).values():
        special["ids"] = [remap[i] for i in special["ids"]]
    return tokenizer, remap


def renumber_ids(config, remap):
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = config.get(key)
        if isinstance(value, int):
            config[key] = remap.get(value, value)
        elif isinstance(value, list):
            config[key] = [remap.get(v, v) for v in value]
    return config


def folder(tokenizer, tokenizer_config=None, generation_config=None):
    parts = [json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":"))]
    for config in (tokenizer_config, generation_config):
        if config is None:
            break
        parts.append(json.dumps(config, ensure_ascii=False, indent=1))
    return "\0".join(parts).encode("utf-8")


def byte_level_vocab(extra):
    alphabet = byte_level_alphabet()
    vocab = {c: i for i, c in enumerate(alphabet)}
    for token in extra:
        vocab[token] = len(vocab)
    return vocab


def hand_written():
    """Folders for the components the test models do not use."""
    seeds = {}
    vocab = byte_level_vocab(["Ġt", "he", "Ġthe", "in", "ing"])
    seeds["normalizers-roberta"] = folder({
        "version": "1.0",
        "added_tokens": [
            {"id": 261, "content": "<s>", "special": True, "normalized": False},
            {"id": 262, "content": "</s>", "special": True, "normalized": False},
            {"id": 263, "content": "<mask>", "special": True, "lstrip": True, "rstrip": False,
             "single_word": False, "normalized": False},
            {"id": 264, "content": "hello", "special": False, "single_word": True,
             "normalized": True},
        ],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
            {"type": "Prepend", "prepend": " "},
        ]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 262], "cls": ["<s>", 261],
                           "trim_offsets": True, "add_prefix_space": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": ["Ġ t", "h e", "Ġt he", "i n", "in g"]},
    }, {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<mask>"},
       {"eos_token_id": [262, 261]})

    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3, "b": 4, "c": 5, "ab": 6, "abc": 7,
             "\u2581": 8, "\u2581a": 9, "<0x41>": 10, "<0xC3>": 11, "<0xA9>": 12}
    seeds["split-bert-unk"] = folder({
        "added_tokens": [
            {"id": 0, "content": "[UNK]", "special": True},
            {"id": 1, "content": "[CLS]", "special": True},
            {"id": 2, "content": "[SEP]", "special": True, "rstrip": True},
        ],
        "normalizer": {"type": "NFD"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext",
             "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Removed", "invert": True},
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
             "split": True},
        ]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
            {"type": "ByteLevel"},
        ]},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": {"type": "BPE", "unk_token": "[UNK]", "fuse_unk": True, "byte_fallback": True,
                  "ignore_merges": True, "vocab": vocab,
                  "merges": [["a", "b"], ["ab", "c"], ["\u2581", "a"]]},
    }, {"add_bos_token": True, "add_eos_token": True, "bos_token": {"content": "[CLS]"},
        "eos_token": "[SEP]"})

    seeds["template-contiguous"] = folder({
        "added_tokens": [{"id": 5, "content": "<|eot|>", "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[a-z]+|[0-9]"},
                          "behavior": "Contiguous", "invert": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|eot|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "x", "type_id": 0}}],
                           "special_tokens": {"x": {"id": "x", "ids": [4, 5],
                                                    "tokens": ["x", "y"]}}},
        "decoder": {"type": "Replace", "pattern": {"String": "_"}, "content": " "},
        "model": {"vocab": {"x": 0, "y": 1, "z": 2, "xy": 3, "xyz": 4},
                  "merges": ["x y", "xy z"]},
    }, None, None)
    return seeds


def main():
    root, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    seeds = {}
    for name in ("gpt2", "llama", "qwen2"):
        src = os.path.join(root, "tests", "data", "hf", name)
        with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
            tokenizer, remap = cut_down(json.load(f))
        configs = []
        for file in ("tokenizer_config.json", "generation_config.json"):
            with open(os.path.join(src, file), encoding="utf-8") as f:
                configs.append(renumber_ids(json.load(f), remap))
        seeds[name] = folder(tokenizer, *configs)
        seeds[name + "-alone"] = folder(tokenizer)
    seeds.update(hand_written())
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
