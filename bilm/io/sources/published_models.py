"""The published ELMo models `bilm.load` opens by name, and where their files are.

`PUBLISHED_MODELS` maps each name to a `PublishedModel`: AllenNLP's models
are two files in its S3 bucket (an options file and its HDF5 weights,
`allennlp:<name>`: `allennlp:small`, `allennlp:original-5.5b`, ...), the
NLPL repository's one zip each (`nlpl:<id>`, the repository's id), among
them ELMoForManyLangs' models of 44 languages, also named by language
(`efml:<language code>`, `ELMOFORMANYLANGS_LANGUAGES`), plus its simplified
Chinese model, a `.tar.bz2` on its authors' server (`efml:zhs`). Every
address is copied from the page in the entry's `published_at`; no publisher
gives SHA-256 sums for these files, so `sha256` is empty everywhere (pass
`sha256=` to `bilm.load` to check an archive whose sum you know).

A name never shadows a local path: `bilm.load("small")` opens `./small`
when it exists. Otherwise a bare AllenNLP name (`small`, `original-5.5b`,
...: the names before the prefix) is its `allennlp:` model, with a
`DeprecationWarning` (bare `small`, `medium`, `original` and `tiny` are
`bilm.presets`' architectures). Downloads are cached by URL, so a model
fetched under its old name is found under the new one. Published models
store no boundary state, so every one of them starts sentences from zeros
unless given `warm_up=` text.

Sites without internet access set a mirror, `BILM_MODEL_MIRROR` (or the
`mirror=` argument): a URL or a local directory holding each file under the
path of its official URL, e.g. for `allennlp:small` and `nlpl:209`:

    <mirror>/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/elmo_2x1024_128_2048cnn_1xhighway_options.json
    <mirror>/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5
    <mirror>/repository/20/209.zip

(and `<mirror>/repository/11/149.zip` for `efml:fi`, `<mirror>/zhs.model.tar.bz2`
for `efml:zhs`).
(`PublishedModel.file_urls(mirror)` gives them). The files are then
downloaded from the mirror into the cache as from the publisher.
"""
import dataclasses
import difflib
import os
import pathlib
import urllib.parse
from typing import Mapping, Optional, Tuple

from bilm.io.sources.model_cache import ModelFileError, is_url
from bilm.utils.deprecation import warn_deprecated

MIRROR_ENVIRONMENT_VARIABLE = "BILM_MODEL_MIRROR"
ALLENNLP_PREFIX = "allennlp:"
NLPL_PREFIX = "nlpl:"
ELMOFORMANYLANGS_PREFIX = "efml:"
# A string ending so names a file, never a published model.
_FILE_EXTENSIONS = (".zip", ".json", ".hdf5", ".h5", ".gz", ".tar", ".tgz", ".bz2", ".xz")


@dataclasses.dataclass(frozen=True)
class PublishedModel:
    """One published model and the official addresses of its files.

    Attributes:
        name: what `bilm.load` takes.
        description: the language, corpus and size, as its publisher states them.
        published_at: the page that lists the addresses.
        urls: `(zip URL,)`, or `(options URL, weights URL)`.
        sha256: `{url: SHA-256 (hex)}` for the files whose sum the publisher
            gives (none so far).
        architecture: the model sections of its options file (`lstm`,
            `char_cnn`; prediction form, 262 characters) where they are a
            released size that training offers (`bilm.presets`: `--size`
            reads them here), else None.
    """

    name: str
    description: str
    published_at: str
    urls: Tuple[str, ...]
    sha256: Mapping[str, str] = dataclasses.field(default_factory=dict)
    architecture: Optional[Mapping] = None

    @property
    def is_zip(self):
        return len(self.urls) == 1

    def file_urls(self, mirror=None):
        """The URLs to fetch the files from: `urls`, or with `mirror` (a URL or a
        local directory) each official URL's path below the mirror, in the same order."""
        if mirror is None:
            return self.urls
        base = mirror if is_url(mirror) else pathlib.Path(os.path.abspath(os.path.expanduser(mirror))).as_uri()
        return tuple(base.rstrip("/") + urllib.parse.urlsplit(url).path for url in self.urls)


ALLENNLP_PAGE = "https://allennlp.org/elmo"
NORELMO_PAGE = "https://wiki.nlpl.eu/Vectors/norlm/elmo"
# The NLPL repository maintainer's list of the ELMo models of the
# UiO-UvA system at SemEval-2020 Task 1; it names each model's language only.
SEMEVAL_2020_PAGE = "https://github.com/akutuzov/semeval2020"
ELMOFORMANYLANGS_PAGE = "https://github.com/HIT-SCIR/ELMoForManyLangs"
# ELMoForManyLangs' models in the NLPL repository: (the language's ISO 639
# code, the language, the repository id), as its README lists them; each
# was trained on 20 million words of the CoNLL 2018 shared task's raw text
# (Wikipedia and Common Crawl). `zh` is traditional Chinese (Wikipedia);
# the simplified Chinese model (`efml:zhs`) is published elsewhere.
ELMOFORMANYLANGS_LANGUAGES = (
    ("ar", "Arabic", 136), ("bg", "Bulgarian", 137), ("ca", "Catalan", 138), ("cs", "Czech", 139),
    ("cu", "Old Church Slavonic", 140), ("da", "Danish", 141), ("de", "German", 142), ("el", "Greek", 143),
    ("en", "English", 144), ("es", "Spanish", 145), ("et", "Estonian", 146), ("eu", "Basque", 147),
    ("fa", "Persian", 148), ("fi", "Finnish", 149), ("fr", "French", 150), ("ga", "Irish", 151),
    ("gl", "Galician", 152), ("grc", "Ancient Greek", 153), ("he", "Hebrew", 154), ("hi", "Hindi", 155),
    ("hr", "Croatian", 156), ("hu", "Hungarian", 157), ("id", "Indonesian", 158), ("it", "Italian", 159),
    ("ja", "Japanese", 160), ("ko", "Korean", 161), ("la", "Latin", 162), ("lv", "Latvian", 163),
    ("nl", "Dutch", 164), ("nb", "Norwegian Bokmål", 165), ("nn", "Norwegian Nynorsk", 166), ("pl", "Polish", 167),
    ("pt", "Portuguese", 168), ("ro", "Romanian", 169), ("ru", "Russian", 170), ("sk", "Slovak", 171),
    ("sl", "Slovene", 172), ("sv", "Swedish", 173), ("tr", "Turkish", 174), ("ug", "Uyghur", 175),
    ("uk", "Ukrainian", 176), ("ur", "Urdu", 177), ("vi", "Vietnamese", 178), ("zh", "Chinese (traditional)", 179),
)
ELMOFORMANYLANGS_SIMPLIFIED_CHINESE = "http://39.96.43.154/zhs.model.tar.bz2"


# The char CNN's filters of AllenNLP's released sizes: (width, number).
_RELEASED_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


def released_architecture(dim, projection_dim, n_highway):
    """The model sections of an AllenNLP released size's options file (`<layers>x<dim>_<projection>_2048cnn_
    <n>xhighway`), a new dict."""
    return {
        "lstm": {"dim": dim, "projection_dim": projection_dim, "n_layers": 2,
                 "cell_clip": 3, "proj_clip": 3, "use_skip_connections": True},
        "char_cnn": {"activation": "relu", "embedding": {"dim": 16}, "filters": [list(f) for f in _RELEASED_FILTERS],
                     "max_characters_per_token": 50, "n_characters": 262, "n_highway": n_highway},
    }


def _allennlp(name, description, options_url, weights_url, architecture=None):
    return PublishedModel(f"{ALLENNLP_PREFIX}{name}", f"AllenNLP: {description}", ALLENNLP_PAGE,
                          (options_url, weights_url), architecture=architecture)


def _nlpl(model_id, description, published_at, repository=20):
    return PublishedModel(f"{NLPL_PREFIX}{model_id}", f"NLPL repository: {description}", published_at,
                          (f"http://vectors.nlpl.eu/repository/{repository}/{model_id}.zip",))


def _elmoformanylangs():
    """Each ELMoForManyLangs model under its two names, `efml:<code>` and `nlpl:<id>`, and `efml:zhs`."""
    for code, language, model_id in ELMOFORMANYLANGS_LANGUAGES:
        description = f"ELMoForManyLangs, {language}, 20M words of CoNLL 2018 raw text (Wikipedia, Common Crawl)"
        nlpl = _nlpl(model_id, description, ELMOFORMANYLANGS_PAGE, repository=11)
        yield nlpl
        yield PublishedModel(f"{ELMOFORMANYLANGS_PREFIX}{code}", description, ELMOFORMANYLANGS_PAGE, nlpl.urls)
    yield PublishedModel(f"{ELMOFORMANYLANGS_PREFIX}zhs", "ELMoForManyLangs, simplified Chinese, the Xinhua part of "
                         "Chinese Gigaword v5", ELMOFORMANYLANGS_PAGE, (ELMOFORMANYLANGS_SIMPLIFIED_CHINESE,))


PUBLISHED_MODELS = {model.name: model for model in (
    _allennlp("small", "English, 2x1024_128_2048cnn_1xhighway (13.6M parameters), 1 Billion Word Benchmark",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/"
              "elmo_2x1024_128_2048cnn_1xhighway_options.json",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/"
              "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5",
              released_architecture(1024, 128, 1)),
    _allennlp("medium", "English, 2x2048_256_2048cnn_1xhighway (28.0M parameters), 1 Billion Word Benchmark",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x2048_256_2048cnn_1xhighway/"
              "elmo_2x2048_256_2048cnn_1xhighway_options.json",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x2048_256_2048cnn_1xhighway/"
              "elmo_2x2048_256_2048cnn_1xhighway_weights.hdf5",
              released_architecture(2048, 256, 1)),
    _allennlp("original", "English, 2x4096_512_2048cnn_2xhighway (93.6M parameters), 1 Billion Word Benchmark",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/"
              "elmo_2x4096_512_2048cnn_2xhighway_options.json",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/"
              "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5",
              released_architecture(4096, 512, 2)),
    _allennlp("original-5.5b", "English, 2x4096_512_2048cnn_2xhighway (93.6M parameters), 5.5B tokens of "
                               "Wikipedia and WMT 2008-2012 news crawl; AllenNLP's recommended default",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway_5.5B/"
              "elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway_5.5B/"
              "elmo_2x4096_512_2048cnn_2xhighway_5.5B_weights.hdf5"),
    _allennlp("pubmed", "English biomedical text, 2x4096_512_2048cnn_2xhighway, PubMed (contributed by "
                        "Matthew Peters)",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pubmed/"
              "elmo_2x4096_512_2048cnn_2xhighway_options.json",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pubmed/"
              "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5"),
    _allennlp("portuguese-wikipedia", "Portuguese, Wikipedia (contributed by the Federal University of Goiás)",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pt/wikipedia/options.json",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pt/wikipedia/"
              "elmo_pt_weights.hdf5"),
    _allennlp("portuguese-brwac", "Portuguese, brWaC corpus (contributed by the Federal University of Goiás)",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pt/brwac/options.json",
              "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/contributed/pt/brwac/"
              "elmo_pt_weights_dgx1.hdf5"),
    _nlpl(201, "German (the corpus is not stated where the id is listed)", SEMEVAL_2020_PAGE),
    _nlpl(202, "Swedish (the corpus is not stated where the id is listed)", SEMEVAL_2020_PAGE),
    _nlpl(203, "Latin (the corpus is not stated where the id is listed)", SEMEVAL_2020_PAGE),
    _nlpl(209, "English (the corpus is not stated where the id is listed)", SEMEVAL_2020_PAGE),
    _nlpl(210, "Norwegian, lemmatized Norwegian Wikipedia of September 2020 (about 160M words)", NORELMO_PAGE),
    _nlpl(211, "Norwegian, tokenized Norwegian Wikipedia of September 2020 (about 160M words)", NORELMO_PAGE),
    _nlpl(217, "Norwegian, NorELMo30: the NorBERT corpus (Wikipedia and Norsk Aviskorpus), 30,000 target words",
          NORELMO_PAGE),
    _nlpl(218, "Norwegian, NorELMo100: the NorBERT corpus (Wikipedia and Norsk Aviskorpus), 100,000 target words",
          NORELMO_PAGE),
    *_elmoformanylangs(),
)}


def may_be_model_name(path):
    """Whether `path` may be meant as a published model's name rather than a
    file: a string without a path separator and without a model file's extension."""
    if not isinstance(path, str) or not path or is_url(path):
        return False
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return not any(sep in path for sep in separators) and not path.lower().endswith(_FILE_EXTENSIONS)


def find_published_model(name):
    """The `PublishedModel` called `name`.

    Raises:
        ModelFileError: no published model has that name; the message lists
            the names, the closest first if one is close.
    """
    if name in PUBLISHED_MODELS:
        return PUBLISHED_MODELS[name]
    if ALLENNLP_PREFIX + name in PUBLISHED_MODELS:  # AllenNLP's names before they had their family's prefix
        warn_deprecated(f"The model name {name!r} is deprecated; use {ALLENNLP_PREFIX + name!r} (bare names are "
                        "bilm.presets' architectures).")
        return PUBLISHED_MODELS[ALLENNLP_PREFIX + name]
    if name.startswith(NLPL_PREFIX) and name[len(NLPL_PREFIX):].isdigit():
        model_id = name[len(NLPL_PREFIX):]
        listed = ", ".join(n for n in PUBLISHED_MODELS if n.startswith(NLPL_PREFIX))
        raise ModelFileError(
            f"{name} is not one of the NLPL repository's ELMo models bilm lists ({listed}); the repository also "
            "holds word2vec, fastText and BERT models, which bilm does not read. If it is an ELMo model, pass "
            f"its URL: bilm.load('http://vectors.nlpl.eu/repository/20/{model_id}.zip').")
    # A name is also matched without its family's prefix ('smal' finds 'allennlp:small').
    candidates = {**{published.split(":", 1)[-1]: published for published in PUBLISHED_MODELS},
                  **{published: published for published in PUBLISHED_MODELS}}
    close = difflib.get_close_matches(name, candidates, n=1)
    suggestion = f" Did you mean {candidates[close[0]]!r}?" if close else ""
    raise ModelFileError(
        f"No model at {name!r}: no such file or directory, and no published model has that name.{suggestion} "
        f"Published names: {', '.join(PUBLISHED_MODELS)} (see bilm.io.sources.published_models).")


def model_mirror(mirror=None):
    """`mirror` if given, else `$BILM_MODEL_MIRROR` if set, else None."""
    if mirror is not None:
        return os.fspath(mirror)
    return os.environ.get(MIRROR_ENVIRONMENT_VARIABLE) or None
