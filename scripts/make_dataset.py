"""Write a synthetic YOLO dataset (no download):
python scripts/make_dataset.py OUT [--train N --val N --imgsz PX --segments | --task detect|segment|pose|obb|classify]."""

import argparse

from yolo_det.synthetic import make_dataset, make_task_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="folder to write images/, labels/ and data.yaml into")
    parser.add_argument("--train", type=int, default=16, help="training images (default 16)")
    parser.add_argument("--val", type=int, default=8, help="validation images (default 8)")
    parser.add_argument("--imgsz", type=int, default=128, help="image size in pixels (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same bytes (default 0)")
    parser.add_argument("--segments", action="store_true", help="polygon labels (segmentation) instead of boxes")
    parser.add_argument("--task", choices=["detect", "segment", "pose", "obb", "classify"],
                        help="a dataset for this Ultralytics task (classify: class folders; prints the data= to use)")
    args = parser.parse_args()
    if args.task:
        print(make_task_dataset(args.out, args.task, n_train=args.train, n_val=args.val, imgsz=args.imgsz,
                                seed=args.seed))
        return
    print(make_dataset(args.out, n_train=args.train, n_val=args.val, imgsz=args.imgsz, seed=args.seed,
                       segments=args.segments))


if __name__ == "__main__":
    main()
