"""The commands of bilm, one module each with `main(argv=None, prog=None)`: run as `bilm <subcommand>`
(`bilm.commands.cli`) and as the scripts of bin/ (bilm-tf's and AllenNLP's names and flags).

`SUBCOMMANDS` lists them: `{subcommand: (module, its bin/ script or None, what it does)}`.
"""
SUBCOMMANDS = {
    "embed": ("elmo", "elmo.py", "the ELMo vectors of every line of a text file, to HDF5"),
    "train": ("train_elmo", "train_elmo.py", "train a biLM on your corpus, or adapt a published model to it"),
    "restart": ("restart", "restart.py", "continue a training run from its latest checkpoint"),
    "evaluate": ("run_test", "run_test.py", "held-out perplexity of a training run's latest checkpoint"),
    "dump-weights": ("dump_weights", "dump_weights.py", "a training run's weight file, for embedding"),
    "vocab": ("build_vocab", "build_vocab.py", "a training vocabulary from your corpus"),
    "quickstart": ("quickstart", "quickstart.py", "train, evaluate and embed a tiny model in a few minutes"),
    "dump-token-embeddings": ("dump_token_embeddings", "dump_token_embeddings.py",
                              "the char CNN's encoding of every vocabulary token, for token-input models"),
    "dump-bilm-embeddings": ("dump_bilm_embeddings", "dump_bilm_embeddings.py",
                             "the biLM's layers for every sentence of a dataset file (bilm-tf's format)"),
    "doctor": ("doctor", None, "what bilm runs on here: backends, devices, native kernels, model cache"),
}
