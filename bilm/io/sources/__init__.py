"""Where models come from: the published models by name, the download cache, a model's files in a
directory, zip or URL, and other families' models (ELMoForManyLangs, TF1 Hub modules) converted into
bilm's files. Built on `bilm.io.formats`, never the other way. Internal: the public names are `bilm.io`'s."""
