"""hub.py: a Hugging Face dataset by name (--hf-dataset), read through the datasets library in streaming mode, as a
stream of numbered records like the local corpus's."""
from dataprep.errors import PrepError
from dataprep.readers import is_document, json_kind


class HubCorpus:
    def __init__(self, dataset, name, split, field):
        try:
            import datasets
        except ImportError:
            raise PrepError("--hf-dataset needs the Hugging Face datasets package, which is not installed "
                            "(pip install datasets)")
        self.description = f"{dataset}" + (f" ({name})" if name else "") + f", split {split}"
        self.dataset, self.name, self.split, self.field = dataset, name, split, field
        self.skipped = []  # --skip-invalid is for local files: a row without a text stops the run
        try:
            self.stream = datasets.load_dataset(dataset, name, split=split, streaming=True)
        except Exception as e:  # the library raises many kinds (not found, offline, bad config, bad split)
            raise PrepError(f"cannot open the Hugging Face dataset {self.description}: {e}")
        # the number of rows, when the dataset's card states it (it places --val-fraction's split and the ETA)
        info = (self.stream.info.splits or {}).get(split)
        self.total = info.num_examples if info and info.num_examples else None

    def names(self):
        return [f"hf:{self.description}"]

    def identity(self):
        return [{"hf_dataset": self.dataset, "hf_name": self.name, "hf_split": self.split, "records": self.total}]

    def empty_message(self):
        return f"the Hugging Face dataset {self.description} holds no text"

    def records(self, start):
        """(record number, text) of every row from start on whose text makes a document."""
        for index, row in enumerate(self.stream.skip(start) if start else self.stream, start):
            text = row.get(self.field)
            if not isinstance(text, str):
                problem = f"no {self.field!r} column (it has {', '.join(map(repr, row))})" if self.field not in row \
                    else f"the {self.field!r} column is {json_kind(text)}, not a string"
                raise PrepError(f"the Hugging Face dataset {self.description}, row {index}: {problem}")
            if is_document(text):
                yield index, text
